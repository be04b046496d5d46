/*
 * The renderer of kind "explorer" (meshplan.course.plotting.TimelineExplorer): every schedule's timeline for the
 * chosen p, m, v, drawn as SVG on one time axis (the longest makespan fills the box; data.minScale is the fewest
 * pixels per time unit), the chosen schedule highlighted, its caption below. Each device's events come as
 * "KINDmb[.chunk][|bwmb[.bwchunk]]@start-end" (plotting._encode); the drawing is redone when the box's width
 * changes. When the timelines are wider than the box (a phone), the box scrolls sideways: a line above it says so,
 * the box becomes a named keyboard stop, and each timeline's GPU labels stay pinned at its left edge.
 * Comments before the code (these) are not written into the pages.
 */
(function(MP){if(!MP||MP.kinds["explorer"])return;MP.kinds["explorer"]=function(root,data,ui){
  var view=root.querySelector(".mp-tl-view"),cap=root.querySelector(".mp-caption"),L=data.layout,NS="http://www.w3.org/2000/svg",
      hint=root.querySelector(".mp-tl-hint"),
      legend=root.querySelector(".mp-legend"),hatch=root.id+"-hatch",lastW=0;
  data.legend.forEach(function(k){var s=document.createElement("span");s.innerHTML='<span class="mp-swatch"></span>';
    var sw=s.firstChild;if(k[0]==="F&B"){sw.style.border="2px solid "+k[2];}else sw.style.background=k[2];
    s.appendChild(document.createTextNode(k[1]));legend.appendChild(s);});
  if(data.chunked){var s=document.createElement("span");s.innerHTML='<span class="mp-swatch" style="background:repeating-linear-gradient(45deg,#777 0 3px,#ccc 3px 6px)"></span>hatched: second chunk';legend.appendChild(s);}
  function el(name,attrs,text){var e=document.createElementNS(NS,name);for(var k in attrs)e.setAttribute(k,attrs[k]);if(text!==undefined)e.textContent=text;return e;}
  function step(s){var st=1;while(st*s<40){var ks=[2,2.5,2];for(var i=0;i<3;i++){st*=ks[i];if(st*s>=40)break;}}return st;}
  function parse(ev){var m=/^(F&B|BW|F|B|W)(\d+)(?:\.(\d+))?(?:\|(\d+)(?:\.(\d+))?)?@([^-]+)-(.+)$/.exec(ev);
    return {kind:m[1],mb:+m[2],chunk:+(m[3]||0),bwmb:+(m[4]||0),bwchunk:+(m[5]||0),start:+m[6],end:+m[7]};}
  function svg(t,scale){var w=Math.round(L.left+t.makespan*scale+L.right),h=L.row*t.pp+L.axis,
      s=el("svg",{width:w,height:h,viewBox:"0 0 "+w+" "+h,role:"img","font-size":"11",fill:"currentColor"});
    var defs=el("defs"),pat=el("pattern",{id:hatch,width:6,height:6,patternUnits:"userSpaceOnUse",patternTransform:"rotate(45)"});
    pat.appendChild(el("rect",{width:2.5,height:6,fill:"#fff","fill-opacity":"0.45"}));defs.appendChild(pat);s.appendChild(defs);
    for(var g=0;g<t.pp;g++){s.appendChild(el("text",{"class":"mp-gpu-label",x:0,y:(L.row*g+L.row*0.72).toFixed(1)},"GPU "+g));
      if(!t.ev[g])continue;
      t.ev[g].split(" ").forEach(function(txt){var e=parse(txt),y=L.row*g+1,parts=[[e.start,e.end,e.kind,e.mb,e.chunk]];
        if(e.kind==="F&B"){var mid=e.start+(e.end-e.start)*data.times[0]/(data.times[0]+data.times[1]+data.times[2]);
          parts=[[e.start,mid,"F",e.mb,e.chunk],[mid,e.end,"BW",e.bwmb,e.bwchunk]];}
        parts.forEach(function(p){var x=L.left+p[0]*scale,bw=Math.max((p[1]-p[0])*scale-1,0.5);
          s.appendChild(el("rect",{x:x.toFixed(1),y:y,width:bw.toFixed(1),height:L.row-3,fill:data.colours[p[2]],"data-kind":p[2],"data-mb":p[3]}));
          if(p[4]%2)s.appendChild(el("rect",{x:x.toFixed(1),y:y,width:bw.toFixed(1),height:L.row-3,fill:"url(#"+hatch+")"}));
          if(bw>=7*String(p[3]).length+4)s.appendChild(el("text",{"class":"mp-mb",x:(x+bw/2).toFixed(1),y:(y+L.row*0.62).toFixed(1),"text-anchor":"middle",fill:data.textColours[p[2]]},String(p[3])));});
        if(e.kind==="F&B")s.appendChild(el("rect",{x:(L.left+e.start*scale).toFixed(1),y:y-0.5,width:Math.max((e.end-e.start)*scale-1,0.5).toFixed(1),height:L.row-2,fill:"none",stroke:data.colours["F&B"],"stroke-width":1.5}));});}
    var base=L.row*t.pp;s.appendChild(el("line",{x1:L.left,x2:(L.left+t.makespan*scale).toFixed(1),y1:base+1,y2:base+1,stroke:"currentColor"}));
    var st=step(scale);for(var k=0;k*st<=t.makespan+1e-9;k++){var x=(L.left+k*st*scale).toFixed(1);
      s.appendChild(el("line",{x1:x,x2:x,y1:base+1,y2:base+5,stroke:"currentColor"}));
      s.appendChild(el("text",{"class":"mp-tick",x:x,y:base+17,"text-anchor":"middle"},String(Math.round(k*st*1000)/1000)));}
    s.setAttribute("data-makespan",t.makespan);return s;}
  function draw(){var rows=data.rows[ui.key(["p","m","v"])],cur=ui.text("schedule"),ends=[],divs=[];
    rows.forEach(function(r){if(r.t)ends.push(data.timelines[r.t].makespan);});
    view.textContent="";
    rows.forEach(function(r){var d=document.createElement("div");d.className="mp-tl-row"+(r.name===cur?" mp-current":"");
      d.setAttribute("data-kind",r.kind);var h=document.createElement("div");
      h.innerHTML='<span class="mp-tl-title"></span> <span class="mp-tl-label"></span>';
      h.firstChild.textContent=r.name;h.lastChild.textContent=r.label?"\u2014 "+r.label:"";d.appendChild(h);
      view.appendChild(d);divs.push(d);});
    var cs=getComputedStyle(divs[0]),W=divs[0].clientWidth-parseFloat(cs.paddingLeft)-parseFloat(cs.paddingRight);
    var scale=ends.length?Math.max((W-L.left-L.right)/Math.max.apply(null,ends),data.minScale):1;
    rows.forEach(function(r,i){
      if(r.error){var m=document.createElement("div");m.className="mp-invalid";m.textContent="Not valid here: "+r.error;divs[i].appendChild(m);}
      else{var tr=document.createElement("div"),sv=svg(data.timelines[r.t],scale);tr.className="mp-tl-track";
        sv.setAttribute("aria-label",r.name+" timeline of "+data.timelines[r.t].pp+" GPUs"+(r.label?", "+r.label:""));
        tr.appendChild(sv);
        divs[i].appendChild(tr);}});
    var over=view.scrollWidth>view.clientWidth+1;if(hint)hint.hidden=!over;view.classList.toggle("mp-overflows",over);
    if(over){view.setAttribute("tabindex","0");view.setAttribute("role","region");
      view.setAttribute("aria-label","Pipeline schedules, scroll sideways");}
    else["tabindex","role","aria-label"].forEach(function(a){view.removeAttribute(a);});
    if(over)rows.forEach(function(r,i){if(!r.t)return;var tr=divs[i].querySelector(".mp-tl-track"),g=document.createElement("div");
      g.className="mp-tl-gpus";g.setAttribute("aria-hidden","true");g.style.width=L.left+"px";g.style.marginRight=-L.left+"px";
      for(var k=0;k<data.timelines[r.t].pp;k++){var d=document.createElement("div");d.style.height=L.row+"px";
        d.style.lineHeight=L.row+"px";d.textContent="GPU "+k;g.appendChild(d);}
      tr.insertBefore(g,tr.firstChild);});
    var e=data.table[ui.key()];cap.className="mp-caption"+(e.error?" mp-invalid":"");
    cap.textContent=e.error?"Not a valid schedule: "+e.error:e.caption;lastW=view.clientWidth;}
  ui.onChange(draw);draw();
  function refit(){if(view.clientWidth!==lastW)draw();}    /* the box's width settles after the page's layout */
  if(window.ResizeObserver)new ResizeObserver(refit).observe(view);else window.addEventListener("resize",refit);
};})(window.__meshplan);
