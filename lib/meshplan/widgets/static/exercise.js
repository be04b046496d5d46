/*
 * The renderer of kind "exercise" (meshplan.widgets.Exercise): Check, Show me and the answer line.
 * Check stays disabled until something is typed; Enter checks; a combination the library rejects is flagged
 * with its message where the answer goes as soon as a control moves there. The feedback is the runtime's
 * compare (the twin of predict.compare); the worked answer is shown only if the prediction was read. An exercise
 * with choices (a word answer) predicts with radio buttons: the checked one is the prediction; Enter checks.
 * Comments before the code (these) are not written into the pages.
 */
(function(MP){if(!MP||MP.kinds["exercise"])return;MP.kinds["exercise"]=function(root,data,ui){
  var MP=window.__meshplan,ans=root.querySelector(".mp-answer"),pred=root.querySelector(".mp-prediction"),
      check=root.querySelector(".mp-check"),show=root.querySelector(".mp-show");
  function cur(){return data.table[ui.key()];}
  function typed(){if(!data.choices)return pred.value;var r=pred.querySelector("input:checked");return r?r.value:"";}
  function say(text,cls,expl){ans.textContent=text;ans.className="mp-answer"+(cls?" "+cls:"");
    if(expl){var e=document.createElement("div");e.className="mp-explanation";e.textContent=expl;ans.appendChild(e);}}
  function state(){var bad=!!cur().error;check.disabled=bad||!MP.squash(typed());show.disabled=bad;}
  function moved(){var r=cur();if(r.error)say("Not a valid combination: "+r.error,"mp-invalid");else say("");state();}
  function revealed(r){return typeof r.value==="string"||!MP.read(typed(),data.unit).error;}
  function doCheck(){var r=cur();if(r.error)return;
    if(!MP.squash(typed())){say(data.choices?"Choose a prediction first, or press Show me.":"Type a prediction first, or press Show me.");return;}
    say(MP.compare(typed(),r,data.unit,data.digits,data.tolerance),"",revealed(r)?r.explanation:"");}
  check.addEventListener("click",doCheck);
  show.addEventListener("click",function(){var r=cur();if(!r.error)say(MP.reveal(r),"",r.explanation);});
  pred.addEventListener("input",state);pred.addEventListener("change",state);
  pred.addEventListener("keydown",function(ev){if(ev.key==="Enter"){ev.preventDefault();doCheck();}});
  ui.onChange(moved);moved();
};})(window.__meshplan);
